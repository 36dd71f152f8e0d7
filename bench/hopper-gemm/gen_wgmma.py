# Emits the wgmma m64nNk16 wrappers (long operand lists) between the markers in gemm_sm90.cu.
import re, sys
def wrapper(n):
    nreg = n // 2
    regs = ", ".join(f"%{i}" for i in range(nreg))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(nreg))
    return f'''template <int TB>
DEV void wgmma_n{n}(float* d, u64 da, u64 db, int scale_d) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nreg+2}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 "
      "{{{regs}}}, %{nreg}, %{nreg+1}, p, 1, 1, 0, %{nreg+3};\\n}}\\n"
      : {outs}
      : "l"(da), "l"(db), "r"(scale_d), "n"(TB));
}}
'''
body = "".join(wrapper(n) for n in (64, 128, 192, 256))
p = "gemm_sm90.cu"
s = open(p).read()
s = re.sub(r"(// BEGIN GENERATED WGMMA\n).*?(// END GENERATED WGMMA)", lambda m: m.group(1) + body + m.group(2), s, flags=re.S)
open(p, "w").write(s)
