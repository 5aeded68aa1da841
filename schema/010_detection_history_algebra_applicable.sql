-- kcert results schema, migration 10 (issue 33): an opaque production's algebra gate does not
-- run (exact=False), and its stored algebra_verdict is the gate's default PASS. kcert history
-- shows it as n/a from this column, the document's gates.algebra.applicable ('false' for an
-- opaque production; 'true', or NULL for documents written before the field and for ERROR
-- and SKIP rows). Appended as the view's last column, as migration 9 did.
CREATE OR REPLACE VIEW detection_history AS
SELECT t.case_id, t.kind, t.family, e.fingerprint, e.cpu_model, e.gpu, e.torch_version,
       r.run_id, ru.started_at, r.verdict, r.algebra_verdict, r.bias_verdict, r.variance_verdict,
       r.detected, r.false_alarm, r.variance_u, r.max_abs_z, r.replicates,
       r.reference_version, r.production_version, r.calibration,
       ru.profile, ru.kcert_version,
       r.document #>> '{gates,variance,evidence,reaches_horizon}' AS reaches_horizon,
       r.document #>> '{gates,algebra,applicable}' AS algebra_applicable
  FROM result r
  JOIN testcase t ON t.id = r.testcase_id
  JOIN environment e ON e.id = r.environment_id
  JOIN run ru ON ru.id = r.run_id;
