//! HTable tests.
