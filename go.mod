module github.com/usher-vdi/usher

go 1.26.8
