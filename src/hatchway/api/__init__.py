"""Wire formats only: parse, authenticate, translate to and from the engine, stream."""

from hatchway.api.app import create_app

__all__ = ["create_app"]
