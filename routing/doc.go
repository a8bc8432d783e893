// Package routing is the version routing of workflow instance ids: it parses
// ids of the form v1-<id> / v2-<id>, decides which queue (and so which
// workflow implementation) a job belongs to, and mints the prefix of new ids
// from WORKFLOW_V2_ROLLOUT_PERCENT (docs/design.md §4).
//
// The prefix of an id is the only input to the routing decision, so every
// attempt of a job runs on the version it was created with (docs/design.md §9.5). A
// version this deployment does not serve is a dead letter with reason
// unbound_version; there is deliberately no code path that substitutes one
// version for another, because a silent fallback would mix the outputs of two
// implementations inside one job.
//
// # Id grammar
//
// An instance id matches ^(v[0-9]+-)?[A-Za-z0-9_][A-Za-z0-9_-]*$ and is at
// most 64 bytes long. Within that grammar:
//
//   - v<N>-<body>, where N has no leading zero and at most 4 digits and body
//     starts with a letter, digit or '_', is explicitly version vN.
//   - An id that starts like a version prefix — ^[vV][0-9]*[-_] — but is not
//     a well-formed one (v-abc, v01-abc, v0-abc, V2-abc, v2_abc, v_abc, v2-,
//     v2--abc, v12345-abc) is refused with ErrMalformedPrefix: the API
//     answers 400 invalid_instance_id at submission, and the router
//     dead-letters any such job it still meets as unbound_version. It is
//     never read as an un-prefixed id, because that would route it to v1 by
//     guessing.
//   - Anything else (abc, v2, v2abc, vx-abc, version-1) has no prefix and runs
//     on DefaultVersion (v1).
package routing
