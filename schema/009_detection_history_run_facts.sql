-- kcert results schema, migration 9 (issue 32): kcert history shows each result's run
-- profile and kcert version, and marks a variance PASS whose evidence falls short of the
-- horizon. The view gains them as its last columns (CREATE OR REPLACE keeps the existing
-- columns, their order and the grants): reaches_horizon is the document's
-- gates.variance.evidence.reaches_horizon ('true', 'false', or NULL for ERROR, SKIP and
-- documents written before the evidence block).
CREATE OR REPLACE VIEW detection_history AS
SELECT t.case_id, t.kind, t.family, e.fingerprint, e.cpu_model, e.gpu, e.torch_version,
       r.run_id, ru.started_at, r.verdict, r.algebra_verdict, r.bias_verdict, r.variance_verdict,
       r.detected, r.false_alarm, r.variance_u, r.max_abs_z, r.replicates,
       r.reference_version, r.production_version, r.calibration,
       ru.profile, ru.kcert_version,
       r.document #>> '{gates,variance,evidence,reaches_horizon}' AS reaches_horizon
  FROM result r
  JOIN testcase t ON t.id = r.testcase_id
  JOIN environment e ON e.id = r.environment_id
  JOIN run ru ON ru.id = r.run_id;
