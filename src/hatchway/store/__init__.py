"""Everything stateful: SQLAlchemy 2 async tables, migrations, repositories and the cache interface."""

from hatchway.store.cache import Cache, MemoryCache
from hatchway.store.db import Database

__all__ = ["Cache", "Database", "MemoryCache"]
