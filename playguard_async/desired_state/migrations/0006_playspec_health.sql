-- Health-gated convergence: how long a (re)created Playground may take to become healthy, and
-- what is done when it does not (playguard_async/desired_state/inventory.py, Playspec). The
-- defaults are the model's, so existing rows read as before. Numbered 0006: 0004 and 0005 are
-- taken by other work; nothing here depends on them.

ALTER TABLE playspecs
    ADD COLUMN rollback text NOT NULL DEFAULT 'notify'
        CHECK (rollback IN ('off', 'notify', 'auto')),
    ADD COLUMN health_timeout double precision NOT NULL DEFAULT 60
        CHECK (health_timeout > 0 AND health_timeout <= 3600);
