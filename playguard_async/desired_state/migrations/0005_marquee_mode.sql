-- How the engine steers each Marquee (the model's Marquee.mode): 'apply' changes the host,
-- 'detect' runs every cycle as a dry run under the lock, 'off' runs no cycle. Existing rows keep
-- today's behaviour ('apply'). Unqualified, so the migration lands in whichever schema the
-- connection's search_path names first.

ALTER TABLE marquees
    ADD COLUMN mode text NOT NULL DEFAULT 'apply' CHECK (mode IN ('apply', 'detect', 'off'));
