-- The desired state: one table per list of the YAML inventory, with the checks of its models
-- (playguard_async/inventory.py) as CHECK constraints, so a row the daemon would refuse is
-- refused when written. The daemon validates every row again when it reads a snapshot.
-- Local paths (identity_file, known_hosts, password_file) are absolute: there is no inventory
-- file for a relative one to be relative to.

CREATE FUNCTION playguard_name_ok(value text) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN value ~ '^[a-z0-9][a-z0-9-]{0,62}$';

CREATE FUNCTION playguard_safe_chars(value text) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN value ~ '^[A-Za-z0-9._/-]+$';

-- A path on a Marquee: shell-inert characters, absolute or relative as asked, no '..' part.
CREATE FUNCTION playguard_remote_path_ok(value text, absolute boolean) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN playguard_safe_chars(value)
        AND (left(value, 1) = '/') = absolute
        AND value !~ '(^|/)\.\.(/|$)';

-- git check-ref-format rules that the character set does not already exclude.
CREATE FUNCTION playguard_branch_ok(value text) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN playguard_safe_chars(value)
        AND value !~ '^-'
        AND strpos(value, '..') = 0
        AND value !~ '\.$'
        AND value !~ '(^/|/$|//)'
        AND value !~ '(^|/)\.'
        AND value !~ '\.lock(/|$)';

CREATE FUNCTION playguard_host_ok(value text) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN length(value) <= 253 AND value ~ '^[A-Za-z0-9.:-]+$' AND value !~ '^-';

CREATE FUNCTION playguard_image_ok(value text) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN value ~ ('^(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?'
        || '[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*'
        || '(?::\w[\w.-]{0,127})?(?:@[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9a-fA-F]{32,})?$');

-- Every element of a list present and accepted by the check named.
CREATE FUNCTION playguard_images_ok(images text[]) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN array_position(images, NULL) IS NULL
        AND coalesce((SELECT bool_and(playguard_image_ok(image)) FROM unnest(images) image), true);

CREATE TABLE marquees (
    name text PRIMARY KEY CHECK (playguard_name_ok(name)),
    host text NOT NULL CHECK (playguard_host_ok(host)),
    port integer NOT NULL DEFAULT 22 CHECK (port BETWEEN 1 AND 65535),
    "user" text NOT NULL CHECK ("user" <> ''),
    identity_file text NOT NULL CHECK (left(identity_file, 1) = '/'),
    known_hosts text NOT NULL CHECK (left(known_hosts, 1) = '/'),
    docker_socket text NOT NULL DEFAULT '/var/run/docker.sock'
        CHECK (playguard_remote_path_ok(docker_socket, true)),
    workdir text NOT NULL DEFAULT '/srv/playguard' CHECK (playguard_remote_path_ok(workdir, true)),
    state_dir text CHECK (
        playguard_remote_path_ok(state_dir, true)
        OR (left(state_dir, 2) = '~/' AND playguard_remote_path_ok(substr(state_dir, 3), false))
    ),
    launchable boolean NOT NULL DEFAULT true
);

CREATE TABLE registries (
    name text PRIMARY KEY CHECK (playguard_name_ok(name)),
    server text NOT NULL CHECK (server ~ '^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?$'),
    username text NOT NULL CHECK (username <> ''),
    password_file text CHECK (left(password_file, 1) = '/'),
    password_env text CHECK (password_env ~ '^[A-Za-z_][A-Za-z0-9_]*$'),
    CHECK ((password_file IS NULL) <> (password_env IS NULL))
);

CREATE TABLE playspecs (
    name text PRIMARY KEY CHECK (playguard_name_ok(name)),
    repo text NOT NULL CHECK (repo ~ ('^(?:(?:https?|ssh|git|file)://'
        || '|(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+:(?!:))[^\s\x01-\x1f\x7f]+$')),
    compose_file text NOT NULL DEFAULT 'compose.yaml'
        CHECK (playguard_remote_path_ok(compose_file, false)),
    images text[] NOT NULL DEFAULT '{}' CHECK (playguard_images_ok(images)),
    registry text REFERENCES registries (name) ON UPDATE CASCADE
);

CREATE TABLE playgrounds (
    name text PRIMARY KEY CHECK (playguard_name_ok(name)),
    playspec text NOT NULL REFERENCES playspecs (name) ON UPDATE CASCADE,
    marquee text NOT NULL REFERENCES marquees (name) ON UPDATE CASCADE,
    branch text NOT NULL CHECK (playguard_branch_ok(branch)),
    state text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'stopped')),
    expires_at timestamptz,
    stop_when_branch_gone boolean NOT NULL DEFAULT false
);
CREATE INDEX playgrounds_marquee ON playgrounds (marquee);

CREATE TABLE agent_chats (
    name text PRIMARY KEY CHECK (playguard_name_ok(name)),
    playground text NOT NULL REFERENCES playgrounds (name) ON UPDATE CASCADE,
    image text NOT NULL CHECK (playguard_image_ok(image)),
    command text[] NOT NULL CHECK (array_position(command, NULL) IS NULL),
    state text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'closed'))
);
CREATE INDEX agent_chats_playground ON agent_chats (playground);
