"""A downstream repository calling tilelang_ops.gather through @tilelang_ops//platform:ops.

On a CUDA host (bazel test --config=cuda //...) the tensors go to the GPU kernel; without an
accelerator the interface serves CPU tensors with the PyTorch reference.
"""

import platform
import unittest

import torch

import tilelang_ops


class GatherFromDownstream(unittest.TestCase):
    def test_gather_through_the_interface(self):
        device = "cuda" if tilelang_ops.PLATFORM.accelerator == "cuda" else "cpu"
        g = torch.Generator().manual_seed(1234)
        x = torch.randn(100, 576, generator=g).to(torch.bfloat16).to(device)
        index = torch.tensor([3, -1, 99, 100, 0, 42], dtype=torch.int32, device=device)
        y = tilelang_ops.gather(x, index)
        expected = torch.zeros(6, 576, dtype=torch.bfloat16)
        for i, j in enumerate([3, None, 99, None, 0, 42]):
            if j is not None:
                expected[i] = x[j].cpu()
        self.assertTrue(torch.equal(y.cpu(), expected))

    def test_factories_are_exposed(self):
        self.assertTrue(callable(tilelang_ops.ops.gather_tl))
        self.assertIn(tilelang_ops.PLATFORM.tilelang_ops_backend, ("cuda", "asc"))

    def test_stdlib_platform_still_works(self):
        self.assertTrue(platform.machine())


if __name__ == "__main__":
    unittest.main()
