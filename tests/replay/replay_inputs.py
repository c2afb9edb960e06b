"""Tiny hand-made replay inputs shared by the replay tests (fixtures in conftest.py)."""

TINY_TABLE = """model,nodes,samples_per_s
m,0,0
m,1,100
m,2,200
m,4,400
"""

TINY_JOBS = """\
job_id,model,submit_time,min_nodes,max_nodes,total_samples,rescale_up_s,rescale_down_s
A,m,2021-01-01T00:00:00,1,4,1000000,10,5
B,m,2021-01-01T00:00:30,2,4,50000,10,5
"""

# n1..n3 idle at the start, n4 busy; n4 comes idle at 60 s, n1 is reclaimed at 100 s.
TINY_TRACE = """timestamp,node,state
2021-02-01T00:00:00,n1,idle
2021-02-01T00:00:00,n2,idle
2021-02-01T00:00:00,n3,idle
2021-02-01T00:00:00,n4,busy
2021-02-01T00:01:00,n4,idle
2021-02-01T00:01:40,n1,busy
2021-02-01T00:05:00,n2,busy
"""
