-- kcert results schema, migration 1: environments, runs, test cases, results, bias buckets,
-- variance tails, and the detection-history view. Applied by `kcert db migrate` in one
-- transaction and recorded in kcert_migration.

CREATE TABLE environment (
    id           bigserial PRIMARY KEY,
    fingerprint  text NOT NULL UNIQUE,          -- sha256 of identity, 16 hex digits
    identity     jsonb NOT NULL,                -- the hashed fields (CPU, ISA flags, GPU, compilers, LibTorch, BLAS, oneDNN, OS)
    details      jsonb NOT NULL DEFAULT '{}',   -- recorded, not hashed (full LibTorch build config)
    cpu_model    text GENERATED ALWAYS AS (identity->>'cpu_model') STORED,
    gpu          text GENERATED ALWAYS AS (identity->>'gpu') STORED,
    torch_version text GENERATED ALWAYS AS (identity->>'torch_version') STORED,
    first_seen   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE run (
    id            text PRIMARY KEY,             -- chosen by the client, shared by all shards
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz,
    status        text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'finished', 'aborted')),
    kcert_version text NOT NULL,
    git_revision  text NOT NULL DEFAULT '',
    profile       text NOT NULL DEFAULT '',
    shard_count   integer NOT NULL DEFAULT 1 CHECK (shard_count >= 1),
    configuration jsonb NOT NULL DEFAULT '{}'
);

-- Shards that reported into a run (k of N).
CREATE TABLE run_shard (
    run_id        text NOT NULL REFERENCES run(id) ON DELETE CASCADE,
    shard_index   integer NOT NULL,
    environment_id bigint NOT NULL REFERENCES environment(id),
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz,
    PRIMARY KEY (run_id, shard_index)
);

-- A test case as it was when it ran: the same id with another YAML is another row.
CREATE TABLE testcase (
    id           bigserial PRIMARY KEY,
    case_id      text NOT NULL,
    kind         text NOT NULL CHECK (kind IN ('negative', 'positive')),
    family       text NOT NULL,
    mechanism    text NOT NULL DEFAULT '',
    refs         text[] NOT NULL DEFAULT '{}',
    yaml_sha256  text NOT NULL,
    UNIQUE (case_id, yaml_sha256)
);

CREATE TABLE result (
    id                  bigserial PRIMARY KEY,
    run_id              text NOT NULL REFERENCES run(id) ON DELETE CASCADE,
    shard_index         integer NOT NULL DEFAULT 0,
    testcase_id         bigint NOT NULL REFERENCES testcase(id),
    environment_id      bigint NOT NULL REFERENCES environment(id),
    reference_variant   text NOT NULL,
    reference_version   text NOT NULL,
    production_variant  text NOT NULL,
    production_version  text NOT NULL,
    verdict             text NOT NULL CHECK (verdict IN ('PASS', 'WARN', 'FAIL', 'ERROR')),
    algebra_verdict     text NOT NULL,
    bias_verdict        text NOT NULL,
    variance_verdict    text NOT NULL,
    detected            boolean,                -- negatives: some gate WARN or FAIL
    false_alarm         boolean,                -- positives: some gate FAIL
    replicates          bigint NOT NULL,
    seed                numeric(20, 0) NOT NULL,
    variance_u          double precision,       -- NULL when +inf or undefined (see variance_tail.mode)
    max_abs_z           double precision,
    thresholds          jsonb NOT NULL,         -- z*, s_min, c, warn_K, fail_K, tail_q, horizon
    calibration         text,                   -- NULL: defaults
    duration_seconds    double precision NOT NULL,
    error               text,
    document            jsonb NOT NULL,         -- the whole result as in docs/results.md
    recorded_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_id, testcase_id)                -- a repeated upload adds nothing
);
CREATE INDEX result_testcase_env ON result (testcase_id, environment_id);

CREATE TABLE bias_bucket (
    result_id    bigint NOT NULL REFERENCES result(id) ON DELETE CASCADE,
    statistic    text NOT NULL CHECK (statistic IN ('signed', 'magnitude')),
    bucket       bigint NOT NULL,
    flagged      boolean NOT NULL,              -- FAIL or WARN (else: one of the top buckets by |z|)
    direction    smallint NOT NULL,
    z            double precision,              -- NULL for ±inf (constant non-zero difference)
    effect       double precision,
    ulp_effect   double precision NOT NULL,
    mean         double precision NOT NULL,
    sd           double precision NOT NULL,
    verdict      text NOT NULL,
    PRIMARY KEY (result_id, statistic, bucket)
);

CREATE TABLE variance_tail (
    result_id     bigint PRIMARY KEY REFERENCES result(id) ON DELETE CASCADE,
    mode          text NOT NULL,
    u             double precision,
    n_exc         bigint,
    zeta          double precision,
    xi_raw        double precision,
    xi_clipped    double precision,
    sigma         double precision,
    r_t           double precision,
    se            double precision,
    u_bound       double precision,             -- U; NULL when +inf
    zero_fraction double precision,
    q50           double precision,
    q90           double precision,
    q99           double precision,
    k_max         double precision,             -- NULL when +inf
    khat          double precision[] NOT NULL   -- the K-hat sample ('Infinity' allowed)
);

CREATE VIEW detection_history AS
SELECT t.case_id, t.kind, t.family, e.fingerprint, e.cpu_model, e.gpu, e.torch_version,
       r.run_id, ru.started_at, r.verdict, r.algebra_verdict, r.bias_verdict, r.variance_verdict,
       r.detected, r.false_alarm, r.variance_u, r.max_abs_z, r.replicates,
       r.reference_version, r.production_version, r.calibration
  FROM result r
  JOIN testcase t ON t.id = r.testcase_id
  JOIN environment e ON e.id = r.environment_id
  JOIN run ru ON ru.id = r.run_id;
