module github.com/tollgate-dev/tollgate

go 1.22

require github.com/gomodule/redigo v1.9.3
