"""Offline stand-in for rules_python: forwards to Bazel's native Python rules."""

load("@bazel_tools//tools/python:toolchain.bzl", _py_runtime_pair = "py_runtime_pair")

def py_library(**kwargs):
    native.py_library(**kwargs)

def py_binary(**kwargs):
    native.py_binary(**kwargs)

def py_test(**kwargs):
    native.py_test(**kwargs)

def py_runtime(**kwargs):
    native.py_runtime(**kwargs)

def py_runtime_pair(**kwargs):
    _py_runtime_pair(**kwargs)
