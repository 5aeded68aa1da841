-- kcert results schema, migration 6: a control the build cannot run (a kernel only a newer
-- LibTorch has, e.g. at::rms_norm on LibTorch 1.13) is stored as verdict SKIP with its
-- reason, so the history of an environment says "not run here" instead of having a gap,
-- and nothing counts it as a pass. Like an ERROR it ran no gate: its gate columns are NULL.

ALTER TABLE result ADD COLUMN skipped text;

ALTER TABLE result DROP CONSTRAINT result_verdict_check;
ALTER TABLE result ADD CONSTRAINT result_verdict_check
    CHECK (verdict IN ('PASS', 'WARN', 'FAIL', 'ERROR', 'SKIP'));

ALTER TABLE result DROP CONSTRAINT result_gate_verdicts_null_iff_error;
ALTER TABLE result
    ADD CONSTRAINT result_gate_verdicts_null_iff_not_run CHECK (
        (verdict IN ('ERROR', 'SKIP')) = (algebra_verdict IS NULL)
        AND (verdict IN ('ERROR', 'SKIP')) = (bias_verdict IS NULL)
        AND (verdict IN ('ERROR', 'SKIP')) = (variance_verdict IS NULL)),
    ADD CONSTRAINT result_skip_has_reason CHECK ((verdict = 'SKIP') = (skipped IS NOT NULL)),
    ADD CONSTRAINT result_skip_not_detection CHECK (verdict <> 'SKIP' OR (detected IS NULL AND false_alarm IS NULL));
