// The example as a module of its own, using the lockq module from this
// checkout (run go mod tidy once, with network access, to fetch pgx).
// make test builds it in GOPATH mode against Debian's packages instead.
module lockq-example

go 1.19

require (
	github.com/jackc/pgx/v4 v4.15.0
	lockq v1.3.0
)

replace lockq => ../../client/go
