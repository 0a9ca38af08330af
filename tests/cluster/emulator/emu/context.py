"""Which pod the stand-in libraries (pylib/) act as: the exec's own pod, or inside a Ray actor's method the
worker pod the actor was placed on, with that process's environment."""
import contextlib
import os

from .model import Pod

_stack = []


def pod():
    if not _stack:
        _stack.append((Pod.current(), dict(os.environ)))
    return _stack[-1][0]


def env():
    pod()
    return _stack[-1][1]


@contextlib.contextmanager
def acting_as(p, environ):
    _stack.append((p, environ))
    try:
        yield
    finally:
        _stack.pop()
