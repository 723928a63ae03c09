-- Health-gated convergence: how long a (re)created Playground may take to become healthy, and
-- what is done when it does not (Playspec in playguard_async/desired_state/inventory.py). Run
-- with search_path set to playguard's schema alone, like every migration: no schema is named.
-- Numbered 0006 (0005 is another change's); nothing here depends on it.
--
-- Since 0004, playspecs may be a view over the application's tables, which no migration may
-- alter: the columns are added only where playspecs is still playguard's own table. A view
-- without them reads as the model's defaults (rollback 'notify', health_timeout 60); its owner
-- adds them to the view to set them per Playspec.

DO $$
BEGIN
    IF (SELECT c.relkind FROM pg_class c
        WHERE c.oid = to_regclass(quote_ident(current_schema()) || '.playspecs')) = 'r' THEN
        ALTER TABLE playspecs
            ADD COLUMN rollback text NOT NULL DEFAULT 'notify'
                CHECK (rollback IN ('off', 'notify', 'auto')),
            ADD COLUMN health_timeout double precision NOT NULL DEFAULT 60
                CHECK (health_timeout > 0 AND health_timeout <= 3600);
    END IF;
END;
$$;
