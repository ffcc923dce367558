/* The values of libfabric macros that bindgen cannot evaluate (casts), kept
 * as symbols so the Rust side can test its hand-written copies against the
 * headers it was built with. */
#include <rdma/fabric.h>

const uint64_t libfabric_sys_fi_addr_unspec = FI_ADDR_UNSPEC;
const uint64_t libfabric_sys_fi_addr_notavail = FI_ADDR_NOTAVAIL;
const uint64_t libfabric_sys_fi_key_notavail = FI_KEY_NOTAVAIL;
const uint32_t libfabric_sys_fi_version_1_17 = FI_VERSION(1, 17);
