module gocshared

go 1.19
