import OpenAI from 'openai';
import { startAnthropicMock, startOpenAIChatMock, startGeminiMock } from './integration/lib/vendor_mocks.mjs';
import { startTahua, gatewayConfig } from './integration/lib/tahua.mjs';
const timeouts = { connect: '2s', first_byte: '5s', idle: '5s', total: '30s' };
const am = await startAnthropicMock(), om = await startOpenAIChatMock(), gm = await startGeminiMock();
const gw = await startTahua({ config: gatewayConfig({
  providers: [
    { name: 'anth', type: 'anthropic', base_url: am.baseUrl(), api_key: 'sk-ant-test', default_max_tokens: 512, timeouts },
    { name: 'oai', type: 'openai', base_url: om.baseUrl(), api_key: 'sk-test', timeouts },
    { name: 'gem', type: 'gemini', base_url: gm.baseUrl(), api_key: 'gm', timeouts },
    { name: 'local', type: 'mock', timeouts },
  ],
  models: [
    { name: 'claude-via', provider: 'anth', upstream_model: 'claude-up' },
    { name: 'gpt-pass', provider: 'oai', upstream_model: 'gpt-up' },
    { name: 'gem-via', provider: 'gem', upstream_model: 'gem-up' },
    { name: 'local-mock', provider: 'local' },
  ] }) });
const c = new OpenAI({ baseURL: gw.url + '/v1', apiKey: 'sk-client', maxRetries: 0 });
const tools = [{ type: 'function', name: 'get_weather', description: 'w', parameters: { type: 'object', properties: { location: { type: 'string' } } }, strict: false }];
const show = async (label, f) => { try { console.log(label, JSON.stringify(await f())); } catch (e) { console.log(label, 'ERR', e.constructor.name, e.status, JSON.stringify(e.error), e.message); } };
for (const model of ['claude-via', 'gpt-pass', 'gem-via', 'local-mock']) {
  await show(model + ' text', () => c.responses.create({ model, input: 'Hi there' }));
  await show(model + ' tool', () => c.responses.create({ model, tools, input: 'Weather?' }));
  await show(model + ' stream text', async () => { const s = c.responses.stream({ model, input: 'Hi there' }); const ev = []; s.on('event', e => ev.push(e.type)); const f = await s.finalResponse(); return [ev, f.output_text]; });
  await show(model + ' stream tool', () => c.responses.stream({ model, tools, input: 'Weather?' }).finalResponse());
}
await show('prev', () => c.responses.create({ model: 'claude-via', input: 'Hi', previous_response_id: 'resp_123' }));
console.log('--- anth reqs'); for (const r of am.requests) console.log(r.path, JSON.stringify(r.body));
console.log('--- oai reqs'); for (const r of om.requests) console.log(r.path, JSON.stringify(r.headers), JSON.stringify(r.body));
console.log('--- log'); for (const l of gw.accessLog()) console.log(JSON.stringify(l));
await gw.kill(); for (const m of [am, om, gm]) await m.close();
