-- Who really made a change, beside who said so: each new entry records the session's role
-- (`session_role`: session_user, which no SET ROLE or SET LOCAL changes) and the role the
-- statement ran as where it differs (`acting_role`: current_user after a SET ROLE, as the
-- trigger saw it), and both are hashed into the chain. The claimed actor (`SET LOCAL
-- playguard.actor`) stays what it is: a claim. Entries written before this migration hold
-- NULL in both and hash as before (playguard_change_canonical), so they still verify.
--
-- Two more operations: TRUNCATE (a statement trigger on every table of playguard's that the
-- daemon reads, and on the application's through `playguard db triggers`, records one entry
-- before the rows go) and PRUNE (`playguard audit prune` appends to each chain it cuts an
-- entry naming the anchor it leaves, key `<seq> <hash>`, so verify trusts no anchor that no
-- entry of its chain names).

ALTER TABLE changes ADD COLUMN session_role text, ADD COLUMN acting_role text;
ALTER TABLE changes DROP CONSTRAINT changes_operation_check;
ALTER TABLE changes ADD CONSTRAINT changes_operation_check
    CHECK (operation IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'PRUNE'));

-- The canonical text of an entry with its roles: 0009's, then (when session_role is known)
-- '|' and both roles as fields. An entry of before (NULL roles) hashes as 0009 made it.
CREATE FUNCTION playguard_change_canonical_roles(id bigint, at timestamptz, relation text,
        key text, columns text[], operation text, actor text, marquees text[], chain text,
        seq bigint, session_role text, acting_role text)
    RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN playguard_change_canonical(id, at, relation, key, columns, operation, actor, marquees,
                                      chain, seq)
        || CASE WHEN session_role IS NULL THEN ''
                ELSE '|' || playguard_change_field(session_role)
                     || playguard_change_field(acting_role) END;
ALTER FUNCTION playguard_change_canonical_roles(bigint, timestamptz, text, text, text[], text,
    text, text[], text, bigint, text, text) SET search_path FROM CURRENT;

-- Append one entry to its chain, under the chain's lock, as the caller: only a role that may
-- INSERT into `changes` (its owner) can run it, which the triggers do through the SECURITY
-- DEFINER playguard_record_change and the operator's prune does as the owner.
CREATE FUNCTION playguard_append_change(relation text, key text, operation text,
        changed text[], concerned text[], acting text)
    RETURNS void
    LANGUAGE plpgsql AS $$
DECLARE
    marquees text[] := ARRAY(SELECT DISTINCT playguard_change_text(m) COLLATE "C"
                             FROM unnest(concerned) AS m WHERE m IS NOT NULL ORDER BY 1);
    chain_name text := CASE WHEN cardinality(marquees) = 1 THEN marquees[1] ELSE '*' END;
    actor text := playguard_change_text(coalesce(
        nullif(current_setting('playguard.actor', true), ''), session_user::text));
    by_session text := playguard_change_text(session_user::text);
    by_acting text := CASE WHEN acting IS DISTINCT FROM session_user::text
                           THEN playguard_change_text(acting) END;
    entry_id bigint;
    entry_at timestamptz := transaction_timestamp();
    last_seq bigint;
    last_hash text;
BEGIN
    PERFORM playguard_lock_chain(chain_name);
    -- Under the lock: a chain's ids then rise with its seq, which verify checks.
    entry_id := nextval('changes_id_seq');
    EXECUTE 'SELECT seq, hash FROM ('
        '(SELECT seq, hash FROM changes WHERE chain = $1 ORDER BY seq DESC LIMIT 1) UNION ALL '
        '(SELECT seq, hash FROM change_anchors WHERE chain = $1 ORDER BY seq DESC LIMIT 1)'
        ') AS head ORDER BY seq DESC LIMIT 1'
        INTO last_seq, last_hash USING chain_name;
    last_seq := coalesce(last_seq, 0);
    last_hash := coalesce(last_hash, '');
    key := playguard_change_text(key);
    INSERT INTO changes (id, at, relation, key, columns, operation, actor, marquees, chain, seq,
                         prev_hash, hash, session_role, acting_role)
    VALUES (entry_id, entry_at, relation, key, changed, operation, actor, marquees, chain_name,
            last_seq + 1, last_hash,
            encode(sha256(convert_to(last_hash || '|' || playguard_change_canonical_roles(
                entry_id, entry_at, relation, key, changed, operation, actor, marquees,
                chain_name, last_seq + 1, by_session, by_acting), 'UTF8')), 'hex'),
            by_session, by_acting);
END;
$$;
REVOKE ALL ON FUNCTION playguard_append_change(text, text, text, text[], text[], text)
    FROM PUBLIC;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION playguard_append_change(text, text, text, text[], text[], '
                   'text) SET search_path = pg_catalog, %I, pg_temp', current_schema());
END;
$$;

-- The triggers' door, as in 0009, now told the role the statement ran as (`acting`: the
-- trigger's current_user; inside this SECURITY DEFINER function current_user is its owner).
DROP FUNCTION playguard_record_change(text, text, text, jsonb, jsonb, text[]);
CREATE FUNCTION playguard_record_change(relation text, key text, operation text,
        old_row jsonb, new_row jsonb, concerned text[], acting text)
    RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    changed text[] := '{}';
BEGIN
    IF pg_trigger_depth() = 0 THEN
        RAISE EXCEPTION 'playguard_record_change is called by playguard''s triggers only';
    END IF;
    IF operation = 'UPDATE' THEN
        changed := ARRAY(SELECT k FROM jsonb_object_keys(new_row) AS k
                         WHERE new_row -> k IS DISTINCT FROM old_row -> k ORDER BY k COLLATE "C");
    ELSIF operation IN ('INSERT', 'DELETE') THEN
        changed := ARRAY(SELECT k FROM jsonb_object_keys(coalesce(new_row, old_row)) AS k
                         ORDER BY k COLLATE "C");
    ELSIF operation <> 'TRUNCATE' THEN
        RAISE EXCEPTION 'playguard_record_change: no such operation %', operation;
    END IF;
    PERFORM playguard_append_change(relation, key, operation, changed, concerned, acting);
END;
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION playguard_record_change(text, text, text, jsonb, jsonb, '
                   'text[], text) SET search_path = pg_catalog, %I, pg_temp', current_schema());
END;
$$;

-- 0009's triggers, the same but for the role they pass.
CREATE OR REPLACE FUNCTION playguard_row_changed() RETURNS trigger
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
    PERFORM playguard_record_change(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME,
        coalesce(new_row ->> 'name', old_row ->> 'name'), TG_OP, old_row, new_row, marquees,
        current_user::text);
    RETURN NULL;
END;
$$;
ALTER FUNCTION playguard_row_changed() SET search_path FROM CURRENT;

CREATE OR REPLACE FUNCTION notify_marquee() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    old_row jsonb := CASE WHEN TG_OP IN ('UPDATE', 'DELETE') THEN to_jsonb(OLD) END;
    new_row jsonb := CASE WHEN TG_OP IN ('INSERT', 'UPDATE') THEN to_jsonb(NEW) END;
    keys text[] := array_remove(ARRAY[old_row ->> TG_ARGV[0], new_row ->> TG_ARGV[0]], NULL);
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
    PERFORM playguard_record_change(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME,
        coalesce(new_row ->> 'name', old_row ->> 'name', new_row ->> 'id', old_row ->> 'id',
                 keys[cardinality(keys)]),
        TG_OP, old_row, new_row, names, current_user::text);
    RETURN NULL;
END;
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION notify_marquee() SET search_path = pg_catalog, pg_temp, %I',
                   current_schema());
END;
$$;

-- TRUNCATE, before the rows go: one entry concerning every Marquee the rows concerned, and
-- their replicas woken. On playguard's tables (no arguments) the Marquees are found as
-- playguard_row_changed finds them, for all rows; on the application's, from notify_marquee's
-- arguments (the column naming the Marquee, the optional lookup), for all rows.
CREATE FUNCTION playguard_table_truncated() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    keys text[];
    names text[];
BEGIN
    IF TG_NARGS = 0 THEN
        IF TG_TABLE_NAME IN ('marquees', 'marquee_steering') THEN
            EXECUTE format('SELECT array_agg(name::text) FROM %I.%I', TG_TABLE_SCHEMA,
                           TG_TABLE_NAME) INTO names;
        ELSE
            names := ARRAY(SELECT DISTINCT p.marquee FROM playgrounds p);
        END IF;
    ELSE
        BEGIN
            EXECUTE format('SELECT array_agg(DISTINCT %I::text) FROM %I.%I', TG_ARGV[0],
                           TG_TABLE_SCHEMA, TG_TABLE_NAME) INTO keys;
            IF TG_NARGS = 1 THEN
                names := keys;
            ELSIF keys IS NOT NULL THEN
                EXECUTE format('SELECT array_agg(DISTINCT found.name::text) '
                               'FROM (%s) AS found(name)', TG_ARGV[1]) INTO names USING keys;
            END IF;
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'playguard truncate on %.%: lookup failed: %',
                TG_TABLE_SCHEMA, TG_TABLE_NAME, SQLERRM;
        END;
    END IF;
    PERFORM playguard_notify_marquees(names);
    PERFORM playguard_record_change(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, NULL, 'TRUNCATE',
        NULL, NULL, names, current_user::text);
    RETURN NULL;
END;
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION playguard_table_truncated() '
                   'SET search_path = pg_catalog, pg_temp, %I', current_schema());
END;
$$;

CREATE TRIGGER marquees_truncate BEFORE TRUNCATE ON marquees
    FOR EACH STATEMENT EXECUTE FUNCTION playguard_table_truncated();
CREATE TRIGGER registries_truncate BEFORE TRUNCATE ON registries
    FOR EACH STATEMENT EXECUTE FUNCTION playguard_table_truncated();
CREATE TRIGGER playspecs_truncate BEFORE TRUNCATE ON playspecs
    FOR EACH STATEMENT EXECUTE FUNCTION playguard_table_truncated();
CREATE TRIGGER playgrounds_truncate BEFORE TRUNCATE ON playgrounds
    FOR EACH STATEMENT EXECUTE FUNCTION playguard_table_truncated();
CREATE TRIGGER agent_chats_truncate BEFORE TRUNCATE ON agent_chats
    FOR EACH STATEMENT EXECUTE FUNCTION playguard_table_truncated();
CREATE TRIGGER marquee_steering_truncate BEFORE TRUNCATE ON marquee_steering
    FOR EACH STATEMENT EXECUTE FUNCTION playguard_table_truncated();
