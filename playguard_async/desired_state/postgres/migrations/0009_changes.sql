-- Every desired-state change is an entry with a cause: the triggers that wake replicas (0002's
-- playguard_row_changed on playguard's own tables, 0004's notify_marquee on the application's)
-- also append one row per changed row to `changes`, in the writer's own transaction (both
-- commit or neither). The daemon writes nothing here. Run with search_path set to playguard's
-- schema alone, like every migration: no schema is named.
--
-- An entry holds names, never values: the relation, the row's key, the names of the columns
-- that changed (all of them for INSERT and DELETE), the operation, the transaction's time, the
-- actor (the transaction's `SET LOCAL playguard.actor = '...'`, else the session's role; at most
-- 200 characters, control and invisible formatting characters replaced by '?') and the Marquees
-- it concerns. Each chain is hash-linked: the entry's hash is sha256 of the previous entry's
-- hash in its chain and the entry's canonical text (playguard_change_canonical, mirrored by
-- `playguard audit verify`). A change that concerns exactly one Marquee is in that Marquee's
-- chain; any other (a playspec or registry many use, a playground moved between two Marquees,
-- a row no Marquee is known for) in the fleet's chain '*', which no Marquee name can be.

CREATE TABLE changes (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL,
    relation text NOT NULL,
    key text,
    columns text[] NOT NULL,
    operation text NOT NULL CHECK (operation IN ('INSERT', 'UPDATE', 'DELETE')),
    actor text NOT NULL,
    marquees text[] NOT NULL,
    chain text NOT NULL,
    seq bigint NOT NULL CHECK (seq > 0),
    prev_hash text NOT NULL,
    hash text NOT NULL,
    UNIQUE (chain, seq)
);
CREATE INDEX changes_marquees ON changes USING gin (marquees);
CREATE INDEX changes_at ON changes (at);

-- Where a retention cut left each chain: the last entry deleted (its seq and hash), so the
-- first entry kept still verifies. Written by the operator's prune job, never by the daemon.
CREATE TABLE change_anchors (
    chain text NOT NULL,
    seq bigint NOT NULL,
    hash text NOT NULL,
    cut_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chain, seq)
);

-- A text field as `length:value`, NULL as '-': no value can pass for two fields.
CREATE FUNCTION playguard_change_field(value text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN value IS NULL THEN '-' ELSE length(value)::text || ':' || value END;

-- The text an entry's hash covers (besides the previous hash): every field but hash itself,
-- the time as microseconds since the epoch. PL/pgSQL rather than SQL: a trigger calls it for
-- every row, and a SQL function with subqueries would be planned again at each call.
CREATE FUNCTION playguard_change_canonical(id bigint, at timestamptz, relation text, key text,
        columns text[], operation text, actor text, marquees text[], chain text, seq bigint)
    RETURNS text
    LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    canonical text := id::text || '|' || (extract(epoch FROM at) * 1000000)::bigint::text || '|'
        || playguard_change_field(relation) || playguard_change_field(key)
        || cardinality(columns)::text || '[';
    item text;
BEGIN
    FOREACH item IN ARRAY columns LOOP
        canonical := canonical || playguard_change_field(item);
    END LOOP;
    canonical := canonical || ']' || playguard_change_field(operation)
        || playguard_change_field(actor) || cardinality(marquees)::text || '[';
    FOREACH item IN ARRAY marquees LOOP
        canonical := canonical || playguard_change_field(item);
    END LOOP;
    RETURN canonical || ']' || playguard_change_field(chain) || seq::text;
END;
$$;
ALTER FUNCTION playguard_change_canonical(bigint, timestamptz, text, text, text[], text, text,
    text[], text, bigint) SET search_path FROM CURRENT;

-- Printable and bounded: at most 200 characters, control characters (C0, DEL, C1) and
-- invisible formatting ones (zero-width, bidi overrides, line separators) as '?'.
CREATE FUNCTION playguard_change_text(value text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN regexp_replace(left(value, 200),
        '[\x01-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]', '?', 'g');

-- Held until the transaction ends by whoever appends to `chain` or cuts it. The chains share
-- 64 locks (a hash of the name picks one; installations in other schemas of the database share
-- them too): an import of 100,000 Marquees holds 64, not 100,000 entries of the server's lock
-- table, at the price of writers to two Marquees sometimes waiting for each other's commit.
CREATE FUNCTION playguard_lock_chain(chain text) RETURNS void
    LANGUAGE sql VOLATILE
    RETURN pg_advisory_xact_lock(hashtext('playguard changes'), hashtext(chain) % 64);

-- Append one entry. SECURITY DEFINER: the application's roles, whose writes fire the triggers,
-- hold no privilege on `changes`; the function runs as its owner (the role that migrated).
-- Called by the triggers only (pg_trigger_depth): a direct call could add a made-up entry.
-- The chain is locked until the transaction ends, so two writers never fork it (under
-- REPEATABLE READ the second writer's snapshot may miss the first's entry: its insert then
-- fails on UNIQUE (chain, seq), and the application retries as for any serialization failure).
CREATE FUNCTION playguard_record_change(relation text, key text, operation text,
        old_row jsonb, new_row jsonb, concerned text[])
    RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    marquees text[] := ARRAY(SELECT DISTINCT playguard_change_text(m) COLLATE "C"
                             FROM unnest(concerned) AS m WHERE m IS NOT NULL ORDER BY 1);
    chain_name text := CASE WHEN cardinality(marquees) = 1 THEN marquees[1] ELSE '*' END;
    changed text[];
    actor text := playguard_change_text(coalesce(
        nullif(current_setting('playguard.actor', true), ''), session_user::text));
    entry_id bigint;
    entry_at timestamptz := transaction_timestamp();
    last_seq bigint;
    last_hash text;
BEGIN
    IF pg_trigger_depth() = 0 THEN
        RAISE EXCEPTION 'playguard_record_change is called by playguard''s triggers only';
    END IF;
    IF operation = 'UPDATE' THEN
        changed := ARRAY(SELECT k FROM jsonb_object_keys(new_row) AS k
                         WHERE new_row -> k IS DISTINCT FROM old_row -> k ORDER BY k COLLATE "C");
    ELSE
        changed := ARRAY(SELECT k FROM jsonb_object_keys(coalesce(new_row, old_row)) AS k
                         ORDER BY k COLLATE "C");
    END IF;
    PERFORM playguard_lock_chain(chain_name);
    -- Under the lock: a chain's ids then rise with its seq, which verify checks.
    entry_id := nextval('changes_id_seq');
    -- The chain's head: its newest entry, else the anchor of its last cut. EXECUTE, planned
    -- at each call: a cached plan made while `changes` was empty scans it whole, and an import
    -- appending to it in one transaction took quadratic time.
    EXECUTE 'SELECT seq, hash FROM ('
        '(SELECT seq, hash FROM changes WHERE chain = $1 ORDER BY seq DESC LIMIT 1) UNION ALL '
        '(SELECT seq, hash FROM change_anchors WHERE chain = $1 ORDER BY seq DESC LIMIT 1)'
        ') AS head ORDER BY seq DESC LIMIT 1'
        INTO last_seq, last_hash USING chain_name;
    last_seq := coalesce(last_seq, 0);
    last_hash := coalesce(last_hash, '');
    key := playguard_change_text(key);
    INSERT INTO changes (id, at, relation, key, columns, operation, actor, marquees, chain, seq,
                         prev_hash, hash)
    VALUES (entry_id, entry_at, relation, key, changed, operation, actor, marquees, chain_name,
            last_seq + 1, last_hash,
            encode(sha256(convert_to(last_hash || '|' || playguard_change_canonical(
                entry_id, entry_at, relation, key, changed, operation, actor, marquees,
                chain_name, last_seq + 1), 'UTF8')), 'hex'));
END;
$$;

-- Pinned to this schema with pg_temp last: a caller's temporary table named `changes` must not
-- catch a definer's insert.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION playguard_record_change(text, text, text, jsonb, jsonb, text[]) '
                   'SET search_path = pg_catalog, %I, pg_temp', current_schema());
END;
$$;

-- Append-only: nobody but the owner reads or writes it directly, and the owner (the role that
-- migrated, usually the daemon's) keeps SELECT and INSERT only. An owner may grant itself the
-- rest again; the README says how a DBA hands the table to a role of its own instead.
REVOKE ALL ON changes, change_anchors FROM PUBLIC;
REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON changes, change_anchors FROM CURRENT_USER;

-- 0002's trigger on playguard's own tables, now also recording each change.
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
        coalesce(new_row ->> 'name', old_row ->> 'name'), TG_OP, old_row, new_row, marquees);
    RETURN NULL;
END;
$$;
-- CREATE OR REPLACE dropped 0004's pin of its search_path: pinned again to this schema.
ALTER FUNCTION playguard_row_changed() SET search_path FROM CURRENT;

-- 0004's trigger for the application's tables (and marquee_steering), now also recording each
-- change. The row's key is its `name`, else its `id`, else the column naming its Marquee.
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
        TG_OP, old_row, new_row, names);
    RETURN NULL;
END;
$$;

-- notify_marquee runs the application's lookup with pg_catalog and pg_temp alone (0004) and
-- finds playguard_record_change in this schema, searched last (functions are never looked up
-- in pg_temp).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION notify_marquee() SET search_path = pg_catalog, pg_temp, %I',
                   current_schema());
END;
$$;
