"""Helpers kept under the module names ``horovod.runner.util`` gives them."""
