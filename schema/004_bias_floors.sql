-- kcert results schema, migration 4: the bias gate's ULP floors join the calibration
-- (rule kcert-cal/2, docs/calibration.md). NULL: the calibration predates them, and runs
-- use the shipped floors (c 0.3, c_magnitude 0.2 ULP).

ALTER TABLE calibration
    ADD COLUMN bias_c                    double precision CHECK (bias_c > 0),
    ADD COLUMN bias_c_magnitude          double precision CHECK (bias_c_magnitude > 0),
    ADD COLUMN previous_bias_c           double precision,
    ADD COLUMN previous_bias_c_magnitude double precision;
