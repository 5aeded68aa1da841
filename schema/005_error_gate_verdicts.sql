-- kcert results schema, migration 5: a harness ERROR ran no gate to its end, so its gate
-- verdict columns are NULL (they used to hold the gates' default PASS, later the string
-- ERROR, and a query counting passing gates counted cases that never ran). Its reason is in
-- `error`, which an ERROR row must have.

ALTER TABLE result
    ALTER COLUMN algebra_verdict DROP NOT NULL,
    ALTER COLUMN bias_verdict DROP NOT NULL,
    ALTER COLUMN variance_verdict DROP NOT NULL;

UPDATE result
   SET algebra_verdict = NULL, bias_verdict = NULL, variance_verdict = NULL,
       error = coalesce(error, 'harness error (reason not recorded before migration 5)')
 WHERE verdict = 'ERROR';

ALTER TABLE result
    ADD CONSTRAINT result_gate_verdicts_null_iff_error CHECK (
        (verdict = 'ERROR') = (algebra_verdict IS NULL) AND (verdict = 'ERROR') = (bias_verdict IS NULL)
        AND (verdict = 'ERROR') = (variance_verdict IS NULL)),
    ADD CONSTRAINT result_gate_verdicts_known CHECK (
        algebra_verdict IN ('PASS', 'WARN', 'FAIL') AND bias_verdict IN ('PASS', 'WARN', 'FAIL')
        AND variance_verdict IN ('PASS', 'WARN', 'FAIL')),
    ADD CONSTRAINT result_error_has_reason CHECK (verdict <> 'ERROR' OR error IS NOT NULL);
