//! Test support the engine ships for its own tests, fuzz targets and tools (not a stable
//! API): the fault-injecting in-memory file system.

pub mod fault;
