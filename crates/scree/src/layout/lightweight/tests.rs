//! Unit tests of the `lightweight` layout.
