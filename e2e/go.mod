module github.com/tollgate-dev/tollgate/e2e

go 1.22.0

replace github.com/tollgate-dev/tollgate => ../

require (
	github.com/gomodule/redigo v1.9.3
	github.com/mitchellh/mapstructure v1.5.1-0.20231216201459-8508981c8b6c
	github.com/tollgate-dev/tollgate v0.0.0-00010101000000-000000000000
	github.com/traefik/paerser v0.2.2
	github.com/traefik/yaegi v0.16.1
	gopkg.in/yaml.v3 v3.0.1
)

require github.com/BurntSushi/toml v1.4.0 // indirect
