module github.com/slidingwindow/slidingwindow/clients/go

go 1.26.0

require (
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/gomodule/redigo v1.8.3
	github.com/mna/redisc v1.1.7
	github.com/redis/go-redis/v9 v9.23.0
	github.com/valkey-io/valkey-go v1.0.80
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
