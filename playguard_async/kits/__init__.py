"""Small tools every layer may use and that know nothing of the product: asyncio helpers, bounded
file reads, terminal-safe text, the process's capacity and the garbage collector's settings."""
