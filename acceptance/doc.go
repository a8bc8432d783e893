// Package acceptance runs the real edgepipe image against a real MinIO
// container and checks what a user would check: the API answers, the MP4 in
// the bucket plays (ffprobe, in a container), versions are routed and
// dead-lettered as docs/design.md §4 says, and a worker killed with SIGKILL in the
// middle of a job neither pays a provider twice nor leaves objects or rows
// pointing at nothing (docs/design.md §9). TestPostgresTopology runs the
// scale-out topology of docker-compose.postgres.yml (Postgres, an API
// process and two worker processes sharing no disk).
//
// The tests are behind the build tag `acceptance` and need a Docker engine:
//
//	make images                                  # or docker/images.sh
//	go test -tags acceptance -count=1 -v ./acceptance
//
// TestMain runs docker/images.sh first, which rebuilds the edgepipe image
// from the current tree when the binary changed and skips everything else
// that is already built (set ACCEPTANCE_NO_BUILD=1 to use the images as they
// are). Image names come from EDGEPIPE_IMAGE, EDGEPIPE_MINIO_IMAGE,
// EDGEPIPE_POSTGRES_IMAGE and EDGEPIPE_BASE_IMAGE, as for docker/images.sh and
// the docker-compose files.
//
// Without a Docker engine every test skips with the reason, except when CI is
// set: there a skipped acceptance suite is a failure. Containers run on a
// private network per test and are removed with testcontainers'
// CleanupContainer; Ryuk is disabled (TESTCONTAINERS_RYUK_DISABLED=true is
// set when the environment does not say otherwise), since no image can be
// pulled for it.
package acceptance
