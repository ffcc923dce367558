/* The libfabric headers libfabric-sys binds. build.rs runs bindgen over this
 * file and compiles the wrappers bindgen generates for the static inline
 * functions these headers define (fi_write, fi_cq_read, fi_close, ...). */
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
