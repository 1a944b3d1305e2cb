// Package schedule makes the PVCBackup controller's scheduling decisions over robfig/cron v3.
//
// Everything here is a pure function of the schedule, the object's status and the time. The
// controller keeps no in-memory cron: on every reconcile it asks Decide what to do, stores
// Decision.Handled in status, and waits with RequeueAfter until the next decision point. A
// restart or a change of leader therefore loses nothing: the next reconcile sees the same status
// and the same (later) time and decides the same way.
package schedule
