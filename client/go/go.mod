// lockq for Go (pgx v4).  The module path is not a download location:
// require it with a replace directive pointing at this directory, e.g.
//
//	go mod edit -require=lockq@v1.3.0 -replace=lockq=/path/to/lockq/client/go
//
// or build in GOPATH mode against Debian's golang-github-jackc-pgx-v4-dev,
// as make test does (client/go/README.md).
module lockq

go 1.19

require (
	github.com/jackc/pgconn v1.11.0
	github.com/jackc/pgx/v4 v4.15.0
)
