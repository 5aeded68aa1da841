-- kcert results schema, migration 8 (issue 32): INCONCLUSIVE is a verdict. A gate whose
-- evidence could not see an effect at its own floor (the bias gate at a replicate count whose
-- |z| cut an effect of c ULP cannot reach; the variance gate under its minimum of replicates)
-- says so instead of PASS. It is neither a detection nor a false alarm: a negative control's
-- `detected` counts WARN and FAIL only, a positive's `false_alarm` FAIL only.

ALTER TABLE result DROP CONSTRAINT result_verdict_check;
ALTER TABLE result ADD CONSTRAINT result_verdict_check
    CHECK (verdict IN ('PASS', 'INCONCLUSIVE', 'WARN', 'FAIL', 'ERROR', 'SKIP'));

ALTER TABLE result DROP CONSTRAINT result_gate_verdicts_known;
ALTER TABLE result ADD CONSTRAINT result_gate_verdicts_known CHECK (
    algebra_verdict IN ('PASS', 'INCONCLUSIVE', 'WARN', 'FAIL')
    AND bias_verdict IN ('PASS', 'INCONCLUSIVE', 'WARN', 'FAIL')
    AND variance_verdict IN ('PASS', 'INCONCLUSIVE', 'WARN', 'FAIL'));

ALTER TABLE result_gradient DROP CONSTRAINT result_gradient_verdict_check;
ALTER TABLE result_gradient DROP CONSTRAINT result_gradient_algebra_verdict_check;
ALTER TABLE result_gradient DROP CONSTRAINT result_gradient_bias_verdict_check;
ALTER TABLE result_gradient DROP CONSTRAINT result_gradient_variance_verdict_check;
ALTER TABLE result_gradient ADD CONSTRAINT result_gradient_verdicts_known CHECK (
    verdict IN ('PASS', 'INCONCLUSIVE', 'WARN', 'FAIL')
    AND algebra_verdict IN ('PASS', 'INCONCLUSIVE', 'WARN', 'FAIL')
    AND bias_verdict IN ('PASS', 'INCONCLUSIVE', 'WARN', 'FAIL')
    AND variance_verdict IN ('PASS', 'INCONCLUSIVE', 'WARN', 'FAIL'));
