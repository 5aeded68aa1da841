-- kcert results schema, migration 3: variance-gate calibrations per environment and
-- operator family (method.md section 6, docs/calibration.md). A run in an environment
-- uses the newest calibration of each family and records its id in result.calibration.

CREATE TABLE calibration (
    id              bigserial PRIMARY KEY,
    environment_id  bigint NOT NULL REFERENCES environment(id),
    family          text NOT NULL,
    warn_k          double precision NOT NULL CHECK (warn_k >= 1),
    fail_k          double precision NOT NULL CHECK (fail_k > warn_k),
    previous_warn_k double precision NOT NULL,
    previous_fail_k double precision NOT NULL,
    rule_version    text NOT NULL,              -- e.g. kcert-cal/1 (docs/calibration.md)
    source_runs     text[] NOT NULL,
    positives       integer NOT NULL,           -- positive controls the thresholds came from
    max_u           double precision NOT NULL,  -- their largest U
    created_by      text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    details         jsonb NOT NULL DEFAULT '{}' -- per-control U values used
);
CREATE INDEX calibration_env_family ON calibration (environment_id, family, created_at DESC);

GRANT SELECT ON calibration TO kcert_reader;
GRANT SELECT, INSERT ON calibration TO kcert_writer;
GRANT USAGE ON SEQUENCE calibration_id_seq TO kcert_writer;
