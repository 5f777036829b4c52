import sys, numpy as np
ref = np.fromfile(sys.argv[1], dtype="<f4")
for f in sys.argv[2:]:
    x = np.fromfile(f, dtype="<f4")
    print(f, "max|d|", float(np.abs(x - ref).max()), "max|ref|", float(np.abs(ref).max()))
