-- How the engine steers each Marquee (the model's Marquee.mode and Marquee.windows):
-- mode 'apply' changes the host, 'detect' runs every cycle as a dry run under the lock, 'off'
-- runs no cycle; windows is a JSON array of maintenance windows ({"kind": "allow" | "deny",
-- "cron": five fields, "duration": seconds or ISO 8601, "timezone": IANA name}), NULL for the
-- fleet's default (the daemon checks each window when it reads the row). Existing rows keep
-- today's behaviour. Unqualified, so the migration lands in whichever schema the connection's
-- search_path names first.

ALTER TABLE marquees
    ADD COLUMN mode text NOT NULL DEFAULT 'apply' CHECK (mode IN ('apply', 'detect', 'off')),
    ADD COLUMN windows jsonb CHECK (windows IS NULL OR jsonb_typeof(windows) = 'array');
