-- Everything playguard owns lives in one schema of its own (the setting desired_state_schema);
-- `playguard db migrate` runs these files with search_path set to that schema alone, so the
-- names below need no schema and land there. The desired-state relations (marquees, registries,
-- playspecs, playgrounds, agent_chats) may have been replaced by views over the application's
-- tables: no migration may alter them from here on.

-- The trigger function of 0002 reads playgrounds and playspecs by unqualified names, which a
-- PL/pgSQL function resolves with the search_path of the session that wrote the row: pin it to
-- this schema (the value current while this runs).
ALTER FUNCTION playguard_row_changed() SET search_path FROM CURRENT;

-- Wake-ups from the application's own tables. The application's owner attaches it:
--   CREATE TRIGGER playguard_notify AFTER INSERT OR UPDATE OR DELETE ON public.playgrounds
--       FOR EACH ROW EXECUTE FUNCTION playguard.notify_marquee('marquee_id',
--           'SELECT name FROM public.marquees WHERE id = ANY ($1::bigint[])');
-- Argument 1: the changed row's column that identifies its Marquee. Argument 2 (optional): a
-- query given that column's old and new values as text[] ($1) that returns the Marquees' names
-- (first column); without it the column's values are the names. Each name is sent on the
-- channel playguard_desired_state at commit. A failing lookup only warns: the application's
-- write never fails because of playguard (the next tick catches the change up).
CREATE FUNCTION notify_marquee() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    keys text[] := array_remove(ARRAY[
        CASE WHEN TG_OP IN ('UPDATE', 'DELETE') THEN to_jsonb(OLD) ->> TG_ARGV[0] END,
        CASE WHEN TG_OP IN ('INSERT', 'UPDATE') THEN to_jsonb(NEW) ->> TG_ARGV[0] END], NULL);
    names text[];
BEGIN
    IF TG_NARGS = 1 THEN
        names := keys;
    ELSIF keys <> '{}' THEN
        BEGIN
            EXECUTE format('SELECT array_agg(DISTINCT found.name::text) FROM (%s) AS found(name)',
                           TG_ARGV[1])
                INTO names USING keys;
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'playguard notify_marquee on %.%: lookup failed: %',
                TG_TABLE_SCHEMA, TG_TABLE_NAME, SQLERRM;
        END;
    END IF;
    PERFORM pg_notify('playguard_desired_state', name)
        FROM (SELECT DISTINCT unnest(names) AS name) AS changed
        WHERE name IS NOT NULL;
    RETURN NULL;
END;
$$;
