"""Everything that talks to Redis: the token lock and its leases, fences, the command channel,
Redis addressing and topology, keys, the cycle records, the cycle's ending and the replica split."""
