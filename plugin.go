package tollgate

import (
	"context"
	"time"

	"github.com/gomodule/redigo/redis"
)

func Probe(addr string) (string, error) {
	c, err := redis.DialContext(context.Background(), "tcp", addr, redis.DialReadTimeout(time.Second))
	if err != nil {
		return "", err
	}
	defer c.Close()
	s, err := redis.String(c.Do("PING"))
	if err != nil {
		return "", err
	}
	_, err = c.Do("NOSUCHCMD")
	return s + " / " + err.Error(), nil
}
