-- What the reconciler found, written back at the end of each cycle so the web application can
-- show it next to the desired state. No foreign keys: a status row outlives a Marquee or
-- Playground deleted meanwhile (the application decides when to drop it), and no triggers: a
-- status write must not wake the cycle that wrote it.

CREATE TABLE marquee_status (
    marquee text PRIMARY KEY,
    outcome text NOT NULL,
    reason text,
    phase text,
    fence bigint,
    replica text NOT NULL,
    cycle text NOT NULL,
    durations jsonb NOT NULL,
    actions integer NOT NULL,
    duration double precision NOT NULL,
    finished_at timestamptz NOT NULL
);

CREATE TABLE playground_status (
    playground text PRIMARY KEY,
    marquee text NOT NULL,
    state text NOT NULL,
    drift jsonb NOT NULL,
    last_action text,
    cycle text NOT NULL,
    finished_at timestamptz NOT NULL
);
CREATE INDEX playground_status_marquee ON playground_status (marquee);
