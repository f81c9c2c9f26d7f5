#!/usr/bin/env python3
# Usage: python3 replayable-lead-log.py GENERATED.jsonl OUT.jsonl  (copy GENERATED.jsonl.meta.json
# to OUT.jsonl.meta.json). For the team_cli bench: a log that `troupe team verify` replays to the end.
# Rewrites the generator's non-Team payloads into Troupe's runtime shapes (same sizes roughly),
# so that a resume-style replay accepts every line. Team lines are copied unchanged.
import json, sys
src, dst = sys.argv[1], sys.argv[2]
dumps = lambda v: json.dumps(v, separators=(',', ':'), ensure_ascii=False)
with open(src, encoding='utf-8') as f, open(dst, 'w', encoding='utf-8') as out:
    for line in f:
        e = json.loads(line)
        t, d = e['type'], e['data']
        if t.startswith('team/'):
            out.write(line); continue
        if t == 'user/message':
            d = {'content': d['content'], 'id': d['id'], 'role': 'user', 'source': {'kind': 'user'}}
        elif t == 'assistant/message':
            blocks = d['message']['content']
            text = ' '.join(b.get('text', '') for b in blocks if b['type'] in ('text', 'reasoning')) or None
            calls = [{'function': {'arguments': b['arguments'], 'name': b['name']}, 'id': b['id'], 'type': 'function'}
                     for b in blocks if b['type'] == 'tool-call']
            msg = {'content': None if calls else text}
            if calls:
                msg['reasoning_content'] = text
                msg['tool_calls'] = calls
            d = {'finishReason': 'tool_calls' if calls else 'stop', 'message': msg, 'step': d['step'], 'turn': d['turn']}
        elif t == 'tool/call':
            d = {'arguments': json.loads(d['arguments']), 'callId': d['callId'], 'name': d['name'], 'step': d['step'], 'turn': d['turn']}
        elif t == 'tool/result':
            m = d['message']['content'][0]
            d = {'callId': m['toolCallId'], 'content': m['content'][0]['text'], 'isError': False, 'name': 'bash', 'step': d['step'], 'turn': d['turn']}
        out.write(dumps({'seq': e['seq'], 'time': e['time'], 'type': t, 'data': d}) + '\n')
