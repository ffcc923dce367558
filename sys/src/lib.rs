//! Raw libfabric bindings. Placeholder until the foundation issue lands.
