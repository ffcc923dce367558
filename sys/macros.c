/* The values of libfabric macros that bindgen cannot evaluate (casts), kept
 * as symbols so the Rust side can test its hand-written copies against the
 * headers it was built with. */
#include <rdma/fabric.h>

const uint64_t libfabric_sys_fi_addr_unspec = FI_ADDR_UNSPEC;
const uint64_t libfabric_sys_fi_addr_notavail = FI_ADDR_NOTAVAIL;
const uint64_t libfabric_sys_fi_key_notavail = FI_KEY_NOTAVAIL;
const uint32_t libfabric_sys_fi_version_1_17 = FI_VERSION(1, 17);

/* fi_domain_attr's data_progress: a field of its own up to 1.x, a member
 * of an anonymous union (with `progress`) from 2.0, so bindgen's struct
 * names it differently; C reaches it the same way in both. */
enum fi_progress libfabric_sys_domain_data_progress(const struct fi_domain_attr *attr)
{
	return attr->data_progress;
}
