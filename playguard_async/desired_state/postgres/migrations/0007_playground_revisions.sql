-- A release is a revision: the revision each Playground runs and its last good one, as the last
-- cycle found them (commit, images by repo digest, digests of .env and our override: JSON of
-- cycle_record.RevisionRecord, null where the cycle did not say), and why it is pinned. Run with
-- search_path set to playguard's schema alone, like every migration: no schema is named.
-- playground_status is playguard's own table (0003), never an application's view.

ALTER TABLE playground_status
    ADD COLUMN revision jsonb,
    ADD COLUMN last_good_revision jsonb,
    ADD COLUMN pinned text;
