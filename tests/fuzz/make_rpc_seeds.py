#!/usr/bin/python3
# Writes tests/fuzz/rpc_corpus: hand-encoded kiln.v1 request messages (protobuf wire format) for
# rpc_request_fuzzer's raw mode, first byte the message type, second 1 (raw). Run from the repo root.
import struct, os, hashlib
def varint(v):
    if v < 0: v += 1<<64
    out=b''
    while True:
        b=v&0x7f; v>>=7
        if v: out+=bytes([b|0x80])
        else: out+=bytes([b]); return out
def fld(n, wt, payload):
    return varint(n<<3|wt)+payload
def s(n, b):
    if isinstance(b,str): b=b.encode()
    return fld(n,2,varint(len(b))+b)
def i(n, v): return fld(n,0,varint(v))
def tensor(name, dt, shape, raw):
    return s(1,name)+s(2,dt)+b''.join(i(3,d) for d in shape)+s(4,raw)
x = tensor('x','FP32',[1,2,4,4], struct.pack('<32f',*[0.25]*32))
seeds = {
 # type byte, mode byte (1 = raw)
 'run_ok': (0, x and s(1,'id')+s(2,x)+s(3,'reference')+i(5,1)+i(6,1)),
 'run_bad_mode': (0, s(1,'id')+i(5,7)),
 'run_bad_arch': (0, s(1,'id')+s(4, i(8,99))),
 'run_short_raw': (0, s(1,'id')+s(2,tensor('x','FP32',[1,2,4,4],b'\0'*5))),
 'run_bool': (0, s(1,'id')+s(2,tensor('x','BOOL',[1,2,4,4],b'\x02'*32))),
 'run_huge_shape': (0, s(1,'id')+s(2,tensor('x','FP32',[1<<62,4],b''))),
 'compile_bad_device': (2, s(3, i(1,99))),
 'compile_inline': (2, s(2,b'\x08\x07')+s(3, i(1,1))),
 'upload_header': (3, s(1, s(1,'m')+i(2,100))),
 'get_model': (4, s(1,'m')),
 'submit_run': (8, s(1, s(1,'id')+i(5,1))),
 'list_jobs_bad_state': (10, i(1,42)),
 'lookup_model': (14, s(1,'m')+s(2,'0'*64)),
 'lookup_bad_sha': (14, s(1,'.hidden')+s(2,'ABC')),
}
os.makedirs('tests/fuzz/rpc_corpus', exist_ok=True)
for name,(t,body) in seeds.items():
    with open('tests/fuzz/rpc_corpus/'+name,'wb') as f: f.write(bytes([t,1])+body)
print(len(seeds))
