-- kcert results schema, migration 7 (issue 31): a case certifies a direction, forward (its
-- outputs) or backward (its gradients). The direction is part of what a result is: read from
-- the stored document (absent in documents written before it: forward), so history and
-- calibration can be asked per direction. A backward result's gates are the worst over its
-- gradients; each gradient's own verdicts, bucket axis and reduction size N are rows of
-- result_gradient.

ALTER TABLE result ADD COLUMN direction text
    GENERATED ALWAYS AS (coalesce(document->>'direction', 'forward')) STORED;
ALTER TABLE result ADD CONSTRAINT result_direction_check CHECK (direction IN ('forward', 'backward'));
CREATE INDEX result_testcase_env_direction ON result (testcase_id, environment_id, direction);

CREATE TABLE result_gradient (
    result_id        bigint NOT NULL REFERENCES result(id) ON DELETE CASCADE,
    gradient         text NOT NULL,              -- dx, dw, ...
    input            text NOT NULL,              -- the input it differentiates with respect to
    bucket_axis      text NOT NULL,
    reduction_size   bigint NOT NULL CHECK (reduction_size >= 0),  -- N: terms a weight's gradient sums per replicate
    verdict          text NOT NULL CHECK (verdict IN ('PASS', 'WARN', 'FAIL')),
    algebra_verdict  text NOT NULL CHECK (algebra_verdict IN ('PASS', 'WARN', 'FAIL')),
    bias_verdict     text NOT NULL CHECK (bias_verdict IN ('PASS', 'WARN', 'FAIL')),
    variance_verdict text NOT NULL CHECK (variance_verdict IN ('PASS', 'WARN', 'FAIL')),
    variance_u       double precision,           -- NULL when +inf or undefined
    max_abs_z        double precision,
    PRIMARY KEY (result_id, gradient)
);

GRANT SELECT ON result_gradient TO kcert_reader;
GRANT SELECT, INSERT ON result_gradient TO kcert_writer;
