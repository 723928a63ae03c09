-- How the engine steers each Marquee (the model's Marquee.mode and Marquee.windows), in a table
-- of playguard's own: `marquees` may be the application's view, which no migration alters from
-- 0004 on. mode 'apply' changes the host, 'detect' runs every cycle as a dry run under the
-- lock, 'off' runs no cycle; windows is a JSON array of maintenance windows ({"kind": "allow" |
-- "deny", "cron": five fields, "duration": seconds or ISO 8601, "timezone": IANA name}), NULL
-- for the fleet's default (the daemon checks each window when it reads the row). A Marquee
-- without a row is steered by default. No foreign key: a view has no key to refer to, and a
-- row for a Marquee that is gone is simply not read. Unqualified names: migrate runs with
-- search_path set to playguard's schema alone.

CREATE TABLE marquee_steering (
    name text PRIMARY KEY CHECK (playguard_name_ok(name)),
    mode text NOT NULL DEFAULT 'apply' CHECK (mode IN ('apply', 'detect', 'off')),
    windows jsonb CHECK (windows IS NULL OR jsonb_typeof(windows) = 'array')
);

-- A changed steering row wakes its Marquee at once, as a changed Marquee row does (0004's
-- function; its argument names the column that holds the Marquee's name).
CREATE TRIGGER playguard_notify AFTER INSERT OR UPDATE OR DELETE ON marquee_steering
    FOR EACH ROW EXECUTE FUNCTION notify_marquee('name');
