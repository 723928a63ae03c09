-- Early wake-up: every change to a row that concerns a Marquee sends its name on the channel
-- playguard_desired_state (pg_notify, delivered at commit; PostgreSQL folds repeats of the same
-- name within one transaction). A replica LISTENs on one dedicated connection and starts that
-- Marquee's cycle at once instead of at its next tick.

CREATE FUNCTION playguard_notify_marquees(names text[]) RETURNS void
    LANGUAGE sql VOLATILE
    BEGIN ATOMIC
        SELECT pg_notify('playguard_desired_state', name)
        FROM (SELECT DISTINCT unnest(names) AS name) AS changed
        WHERE name IS NOT NULL;
    END;

CREATE FUNCTION playguard_row_changed() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    old_row jsonb := CASE WHEN TG_OP IN ('UPDATE', 'DELETE') THEN to_jsonb(OLD) END;
    new_row jsonb := CASE WHEN TG_OP IN ('INSERT', 'UPDATE') THEN to_jsonb(NEW) END;
    keys text[] := ARRAY[old_row ->> 'name', new_row ->> 'name'];
    marquees text[];
BEGIN
    IF TG_TABLE_NAME = 'marquees' THEN
        marquees := keys;
    ELSIF TG_TABLE_NAME = 'playgrounds' THEN
        marquees := ARRAY[old_row ->> 'marquee', new_row ->> 'marquee'];
    ELSIF TG_TABLE_NAME = 'agent_chats' THEN
        marquees := ARRAY(SELECT p.marquee FROM playgrounds p
                          WHERE p.name IN (old_row ->> 'playground', new_row ->> 'playground'));
    ELSIF TG_TABLE_NAME = 'playspecs' THEN
        marquees := ARRAY(SELECT p.marquee FROM playgrounds p WHERE p.playspec = ANY (keys));
    ELSIF TG_TABLE_NAME = 'registries' THEN
        marquees := ARRAY(SELECT p.marquee FROM playgrounds p
                          JOIN playspecs s ON s.name = p.playspec
                          WHERE s.registry = ANY (keys));
    END IF;
    PERFORM playguard_notify_marquees(marquees);
    RETURN NULL;
END;
$$;

CREATE TRIGGER marquees_notify AFTER INSERT OR UPDATE OR DELETE ON marquees
    FOR EACH ROW EXECUTE FUNCTION playguard_row_changed();
CREATE TRIGGER registries_notify AFTER INSERT OR UPDATE OR DELETE ON registries
    FOR EACH ROW EXECUTE FUNCTION playguard_row_changed();
CREATE TRIGGER playspecs_notify AFTER INSERT OR UPDATE OR DELETE ON playspecs
    FOR EACH ROW EXECUTE FUNCTION playguard_row_changed();
CREATE TRIGGER playgrounds_notify AFTER INSERT OR UPDATE OR DELETE ON playgrounds
    FOR EACH ROW EXECUTE FUNCTION playguard_row_changed();
CREATE TRIGGER agent_chats_notify AFTER INSERT OR UPDATE OR DELETE ON agent_chats
    FOR EACH ROW EXECUTE FUNCTION playguard_row_changed();
