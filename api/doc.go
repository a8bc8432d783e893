// Package api is edgepipe's HTTP API (the Worker role): job submission with
// idempotency keys, job status, progress as Server-Sent Events, cancellation,
// result download, the operator endpoints and HTML page, health, metrics and
// the OpenAPI document (openapi.yaml, embedded and served as is).
//
// A submission is accepted (202) only once the job row and its queue message
// are committed in one transaction; everything after that belongs to the
// workers. The API never shows raw errors: a job carries only its safe error
// class, code and message, and every failure of a request is an
// application/problem+json body with a stable code (see problem.go for the
// one place errors become status codes).
//
// Authentication is a bearer token per tenant (EDGEPIPE_TOKENS) for /v1/jobs
// and an operator token (EDGEPIPE_ADMIN_TOKEN) for /v1/admin and /admin,
// which also accepts HTTP Basic with the token as password so a browser can
// use the operations page. A tenant never learns whether another tenant's
// job exists: it is a 404 like a missing one.
package api
