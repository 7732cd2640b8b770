module github.com/slidingwindow/slidingwindow/clients/go

go 1.26.0

require (
	github.com/gomodule/redigo v1.8.3
	github.com/mna/redisc v1.1.7
)

require (
	github.com/stretchr/testify v1.12.1 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
)
