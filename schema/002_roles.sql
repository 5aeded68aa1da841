-- Migration 2: two group roles. Members of kcert_writer store runs; members of kcert_reader
-- query them. Roles are cluster-wide, so they are created only when missing; log-in roles
-- are made members by the administrator (GRANT kcert_reader TO alice).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kcert_writer') THEN
        CREATE ROLE kcert_writer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kcert_reader') THEN
        CREATE ROLE kcert_reader NOLOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO kcert_writer, kcert_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO kcert_reader;
GRANT SELECT, INSERT, UPDATE ON environment, run, run_shard, testcase, result, bias_bucket, variance_tail
    TO kcert_writer;
GRANT SELECT ON detection_history, kcert_migration TO kcert_writer;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO kcert_writer;
