// Package fairness bounds what one managed cluster, and one caller of it, can
// take of the gateway: per cluster, a number of ordinary requests in flight
// and, counted apart, of long-running ones (watch, logs -f, exec, attach,
// port-forward); beyond that a bounded queue per cluster and kind, served
// round-robin among callers (hub user names), with a bounded wait; and a 429
// when the queue is full or the wait runs out, whose Retry-After is how long
// the queue ahead takes at the cluster's pace (so a slow cluster's clients do
// not come back every second).
//
// It is a limiter in front of the pool rather than the generic server's
// priority and fairness (APF): APF would watch the hub's FlowSchemas and
// PriorityLevelConfigurations (more hub RBAC, and the gateway's behaviour
// coupled to the hub's flow-control config), and its flow distinguisher
// cannot include the cluster, which is only known inside the proxy handler.
//
// Each cluster's slots and queues (Slots) are kept in the cluster's record
// (pkg/clusters), made in its creation step and dropped with it; the limiter
// keeps only totals, and starts no goroutine.
package fairness
