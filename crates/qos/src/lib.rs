//! qos
