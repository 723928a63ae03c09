-- Fleet rollouts (playguard_async/desired_state/rollout_policy.py): how a release of a Playspec
-- reaches the fleet, and which Marquees go first. Run with search_path set to playguard's schema
-- alone, like every migration: no schema is named.
--
-- A Playspec's rollout: a JSON object {"waves": [1, "10%", "100%"], "bake": seconds,
-- "max_failures": n, "wave_timeout": seconds}, NULL for the fleet's default (the rollout
-- setting); the daemon validates it when it reads the row. Since 0004 playspecs may be a view
-- over the application's tables, which no migration may alter: the column is added only where
-- playspecs is still playguard's own table. A view without it reads as NULL; its owner adds it
-- to the view (jsonb or json) to set a rollout per Playspec.
--
-- A Marquee's canary flag (admitted in every rollout's first wave) is steering, like its mode and
-- windows: a column of playguard's own marquee_steering (0005), so marquees may stay the
-- application's view. A Marquee without a row is no canary; its trigger already wakes it.

DO $$
BEGIN
    IF (SELECT c.relkind FROM pg_class c
        WHERE c.oid = to_regclass(quote_ident(current_schema()) || '.playspecs')) = 'r' THEN
        ALTER TABLE playspecs
            ADD COLUMN rollout jsonb CHECK (rollout IS NULL OR jsonb_typeof(rollout) = 'object');
    END IF;
END;
$$;

ALTER TABLE marquee_steering ADD COLUMN canary boolean NOT NULL DEFAULT false;
