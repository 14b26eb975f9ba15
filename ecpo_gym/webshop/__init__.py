"""WebShop semantics (pages, search, reward) over WebShop's own files or a generated catalogue."""
