raise RuntimeError("this server cannot start")
